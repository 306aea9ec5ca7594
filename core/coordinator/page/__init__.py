"""The coordinator's public web pages: the project page, its live figures, volunteers' pages.

Server-rendered HTML (no template engine: small functions that build escaped markup), a small
script that refreshes the figures from ``/stats``, no files from anywhere else (no CDN, no fonts),
a strict Content-Security-Policy. It reads the store; it never writes.

- ``routes``   ``ProjectPage``: the routes (``/``, ``/stats``, ``/u/<name>``, ``/static/<name>``),
  security headers, HTML error pages, the figures read at most once per interval.
- ``html``     ``Markup``, ``escape``, ``el``: building HTML from escaped parts.
- ``layout``   the document every page shares (viewport, stylesheet, script) and error pages.
- ``home``     the project page: what it trains and why, how to join, figures, curve, top N.
- ``download`` the "Download the model" section: the published model's archive, size, epoch,
  held-out loss, SHA-256 and the lines that load it.
- ``user``     a volunteer's page: rank, percentile, samples, compute time, days, neighbours.
- ``stats``    ``Stats``: the live figures from the store, and their JSON (``/stats``).
- ``curve``    the loss curves (training and held-out) as SVG path data in a fixed view box.
- ``bars``     a volunteer's samples per day as SVG bars.
- ``formats``  how numbers, durations and times are written.
- ``static``   the script, stylesheet and icon, from the data files (``resources/page``).
"""

from core.coordinator.page.routes import ProjectPage

__all__ = ["ProjectPage"]
