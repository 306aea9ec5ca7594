"""Joining a project: what is offered, its signed manifest fetched and checked, the preview of what
it would use, the attach, and each later look for a signed update.

- ``offers``    project offers: running local swarms first, then attached projects.
- ``joining``   joining by URL (the preview, the attach, each look for a signed update) or from a
  manifest file.
- ``remote_manifest`` fetching a project URL's signed manifest (size cap, timeouts), checking it
  against the pinned key (the URL's ``#key=``, the slot's, or pinned on first use), the copy.
- ``following`` ManifestFollower: each look's verdict recorded on the slot and told; an update
  taken restarts the running peer when it must.
- ``manifest_updates`` which signed updates are taken (peers, data, numbers) and which refused
  (the model's shape, another key, an older version); whether the peer restarts; the poll.
- ``resource_use`` what a project would use here (parameters, disk, network), from its manifest
  alone, without torch.
- ``memory_fit`` whether its model fits this computer's memory: refused (attach, peer start) when
  nothing here could hold it, warned when tight.
"""
