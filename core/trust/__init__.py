"""Who is who, and what they signed: statements about people and training, not networking.

The network authenticates peers with these identities, and the coordinator, the DHT's records and
the training's evidence check these signatures; none of this needs a connection, so the coordinator
reads it without importing ``core.net``.

- ``peer_id``    PeerID: libp2p-style identity multihash of the Ed25519 public key, base58btc.
- ``identity``   Identity: the private key, loaded from or created in a 0600 file.
- ``passes``     AccessPass: a project's signed {user, peer key, expiry}; issuing and checking.
- ``evidence``   Evidence: a member's signed accusation against another in an averaging round
  (who, which round, part and chunk, the statistic); signing and checking, wire and JSON forms.
- ``receipts``   Receipt: a trainer's signed running totals of the expert samples one server
  computed for it in one session; signing and checking, wire and JSON forms.
- ``rollback``   RollbackOrder: the moderators' signed "back to the checkpoint of epoch N";
  signing and checking, its text form.
- ``published_model`` ModelIndex: the signed ``model.json`` beside the published model's archive
  (epoch, held-out figures, file, size, SHA-256); reading, checking, and an archive against it.
- ``signed_index`` what the signed indexes of published files share (the checkpoint's and the
  model's): the checks of their common fields, payload and JSON layouts, the signature's check.
- ``reports``    the bodies reported to a project's coordinator (an epoch's contributions and
  figures, a held-out evaluation, lists of accusations and receipts) with their bounds: built by
  the senders, read by the coordinator.
- ``errors``     TrustError: PeerIdError (not a PeerID) and IdentityError (no usable key file).
"""
