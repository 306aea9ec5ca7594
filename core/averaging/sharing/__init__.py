"""The full state, for a peer that fell behind or just joined: served by donors, downloaded from
several at once, and loaded only when enough donors vouch for it.

- ``state``     StateSharing: donors' announcements, serving byte ranges, the download.
- ``digest``    block digests of a state's bytes, and the state's digest over them.
- ``vouching``  which of the states donors offer for a version is one to load (a pure rule).
"""
