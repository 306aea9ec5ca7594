"""The desktop app and the engine; the figures are on ``docs/benchmarks/app.md``.

- ``gui_startup``   launch to window shown, with the engine already running.
- ``engine_idle``   a paused engine's CPU use.
- ``screenshots``   a PNG of every page of the app (the pictures in ``docs/images/``).
- ``page_browser``  a live coordinator and headless Chromium for its project page (the browser
                    tests use it too).
"""
