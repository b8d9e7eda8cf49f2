"""A bridged call's whole life, in one package.

    bridge.py     the entry: a client request for an interruptible method -> its result;
                  drain and close
    admission.py  a retry's way in: open the sealed requestState, claim its round
                  (the requestState security boundary, in one place)
    runner.py     start a call on an upstream session, deliver answers, the read loop
    suspension.py park a call, replay-mode rounds, URL rounds: one minting path, one
                  round cap; expiry at the deadline
    endings.py    every way a call ends: release the server's questions, cancel upstream,
                  give the session back, forget the record
    live.py       a call held by this replica, and the registry of them (parked counts)
    routing.py    retries whose call another replica owns: forward, takeover, replay, lost;
                  and the owning side of a forward
    forwarding.py the bus between replicas, and a retry on its way to its call's owner
                  (made before the claim, which can carry it)
    takeover.py   continue a gone replica's call on its adopted session, or cancel it
    messages.py   what replicas say to each other, as frozen dataclasses with one codec

Every change of a call's phase goes through `Registry.fire` and the sans-IO
`gateway.protocol.call.CallMachine`. The package depends on ports, not on
transports: `gateway.upstream.port` for legacy sessions, `forwarding.Bus` for other
replicas, `gateway.store.base.SuspendedCallStore`, and `gateway.clock.Clock`.
"""
