"""Which state a downloader loads, of those the donors of one version offer: a pure rule.

A donor is a stranger, and a state is a whole model: loading the first one offered hands every
newcomer whatever that donor likes. So a state is loaded only when it is *vouched for*:

- **two networks**: donors on ``networks`` (2) different networks offer exactly the same bytes
  (the same ``digest.state_digest``). A Sybil's many PeerIDs cost nothing, but they share its
  network: an IPv4 /24 or an IPv6 /48 on the internet; on a LAN each machine counts as its own
  network, and on this computer (loopback) each peer does (``network_of``).
- **nobody disagrees where most peers are**: every donor of the version that answered offers the
  same state, and the caller says the version is where most of the collaboration's fresh records
  are (``Vouching.settled``). This is how a newcomer joins a swarm of one trainer and its backbone
  on one network: there is nobody else to ask, and nobody says otherwise. A lone donor announcing
  an epoch ahead of everyone is not vouched for this way.

Where the collaboration's states are anchored (``Vouching.confirmed``: a project whose manifest
names the keys that confirm its epochs, ``core.training.progress.confirmed``), neither rule is
enough: the identities that make a version "settled" cost nothing, and a network's worth of them
is cheap. There a version is loaded only when it is the confirmed one, and when its digest is
confirmed too (diloco), only the donors offering exactly those bytes are used: one is enough,
however many others offer something else. A donor of a confirming key vouches for its state by
itself (``Vouching.trusted``).

When donors of one version offer different states, the most vouched one wins (most networks, then
most donors). The others are skipped, not accused: honest donors differ at times (a diloco member
that landed a round apart from the others, a dedloc donor on other hardware whose optimizer rounded
otherwise). Where a mode's honest donors of one version hold identical bytes for identical
metadata (``Vouching.exact``: diloco's anchor digest names the outer parameters), a donor whose
header names the chosen state's anchor while its bytes differ is accused: it claims the state the
others hold and serves another. A donor that serves other bytes than its own header lists is
caught block by block during the download (``state``) and accused too.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from core.trust.peer_id import PeerID

NETWORKS = 2
"""Distinct networks whose donors must offer the same state."""
V4_PREFIX = 24
V6_PREFIX = 48


def network_of(address: tuple[str, int] | None) -> str:
    """The network a donor is on, from the address of our connection to it."""
    if address is None:
        return "unknown"
    host, port = address
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return f"host {host}"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return f"{ip} port {port}"  # peers on this computer: each its own
    if ip.is_private or ip.is_link_local:
        return str(ip)  # a LAN: each machine
    prefix = V4_PREFIX if ip.version == 4 else V6_PREFIX
    return str(ipaddress.ip_network(f"{ip}/{prefix}", strict=False))


@dataclass(frozen=True)
class Offer:
    """What one donor offers for a version."""

    donor: PeerID
    digest: str
    """``digest.state_digest`` of its header."""
    network: str
    anchor: str = ""
    """What its metadata names the state by, in a mode that does (``Vouching.exact``)."""


@dataclass(frozen=True)
class Vouching:
    networks: int = NETWORKS
    settled: Callable[[int], bool] | None = None
    """Whether a version is where most of the collaboration's fresh records are (then donors that
    all agree vouch for their state by themselves); None: never."""
    exact: bool = False
    """Honest donors of a version with the same ``Offer.anchor`` hold the same bytes."""
    confirmed: Callable[[int], str | None] | None = None
    """The digest confirmed for a version ("": the version is confirmed, its bytes are not;
    None: it is not confirmed, and is not loaded); None: the project anchors nothing, and the
    rules above decide alone."""
    trusted: Callable[[PeerID], bool] | None = None
    """Donors whose offer vouches for itself: the confirming keys'."""

    def __post_init__(self) -> None:
        if self.networks < 1:
            raise ValueError(f"networks must be at least 1, got {self.networks}")

    def considers(self, version: int) -> bool:
        """Whether a state of ``version`` may be loaded at all (before any donor is asked)."""
        return self.confirmed is None or self.confirmed(version) is not None


@dataclass
class Verdict:
    digest: str | None
    """The state to load; None: none is vouched for."""
    vouchers: list[PeerID] = field(default_factory=list)
    """The donors offering it."""
    skipped: dict[PeerID, str] = field(default_factory=dict)
    """Donors of other states of the version, and why they are not used."""
    accused: dict[PeerID, str] = field(default_factory=dict)
    """Donors that claim the chosen state's anchor and offer other bytes (``Vouching.exact``)."""
    reason: str = ""
    """How the state was vouched for, or why none was."""


def choose(offers: Sequence[Offer], vouching: Vouching, version: int) -> Verdict:
    """The state of ``version`` to load, from the donors' ``offers``."""
    if not offers:
        return Verdict(None, reason="no donor offered a state")
    want = None if vouching.confirmed is None else vouching.confirmed(version)
    if vouching.confirmed is not None and want is None:
        return Verdict(None, reason=f"epoch {version} is not confirmed")
    if want:
        return _confirmed(offers, want, version)
    groups: dict[str, list[Offer]] = {}
    for offer in offers:
        groups.setdefault(offer.digest, []).append(offer)

    def networks(digest: str) -> int:
        return len({o.network for o in groups[digest]})

    vouched = [d for d in groups if networks(d) >= vouching.networks]
    how = f"offered by donors of {vouching.networks} or more networks"
    trusted = vouching.trusted
    if not vouched and trusted is not None:
        vouched = [d for d, group in groups.items() if any(trusted(o.donor) for o in group)]
        how = "offered by a key that confirms the collaboration's states"
    settled = vouching.settled is not None and vouching.settled(version)
    if not vouched and len(groups) == 1 and settled:
        vouched, how = list(groups), "offered by every donor, at the epoch most peers are at"
    if not vouched:
        kinds = f"{len(groups)} different states" if len(groups) > 1 else "one state"
        return Verdict(
            None,
            reason=(
                f"{len(offers)} donor(s) of epoch {version} offer {kinds}, and none is offered "
                f"by donors of {vouching.networks} networks"
            ),
        )
    best = max(vouched, key=lambda d: (networks(d), len(groups[d]), d))
    chosen = groups[best]
    verdict = Verdict(best, [o.donor for o in chosen], reason=how)
    anchors = {o.anchor for o in chosen}
    claimed = next(iter(anchors)) if len(anchors) == 1 else ""
    for digest, group in groups.items():
        if digest == best:
            continue
        for offer in group:
            if vouching.exact and claimed and offer.anchor == claimed:
                verdict.accused[offer.donor] = (
                    f"its state of epoch {version} names the anchor {claimed} as {len(chosen)} "
                    f"other donor(s)' does, but its bytes differ from theirs"
                )
            else:
                verdict.skipped[offer.donor] = (
                    f"its state of epoch {version} differs from the one {len(chosen)} donor(s) "
                    f"of {networks(best)} network(s) offer"
                )
    return verdict


def _confirmed(offers: Sequence[Offer], want: str, version: int) -> Verdict:
    """The confirmed state ``want`` of ``version``: its donors, however few; a donor that names
    it (``Offer.anchor``) and offers other bytes is accused, the others are skipped."""
    chosen = [o for o in offers if o.digest == want]
    verdict = Verdict(
        want if chosen else None,
        [o.donor for o in chosen],
        reason=(
            "the state confirmed for this epoch"
            if chosen
            else f"none of {len(offers)} donor(s) of epoch {version} offers its confirmed state"
        ),
    )
    for offer in offers:
        if offer.digest == want:
            continue
        if offer.anchor == want:
            verdict.accused[offer.donor] = (
                f"its state of epoch {version} names the confirmed state {want[:16]} but its "
                "bytes are another's"
            )
        else:
            verdict.skipped[offer.donor] = (
                f"its state of epoch {version} is not the one confirmed for that epoch"
            )
    return verdict
