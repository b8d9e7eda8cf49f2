"""A bridged call's whole life, in one package.

    bridge.py     the entry, wiring and dispatch only: a client request for an
                  interruptible method -> its result; drain and close
    lifecycle.py  every change of a call's phase and all its ending requires (release the
                  server's questions, cancel upstream, reuse / close / discard the session,
                  forget the record); the deadline, a lost stream, ownership on a fleet
    live.py       a call held by this replica (and its store record), the registry of them
    admission.py  a retry's way in: open the sealed requestState, claim its round
                  (the requestState security boundary, in one place)
    retries.py    a retry's round claimed, and resumed here or routed where its call is
    runner.py     start a call on an upstream session, deliver answers, the read loop
    suspension.py mint a round: park, replay-mode rounds, URL rounds; one round cap
    routing.py    retries whose call another replica owns: forward, takeover, replay, lost;
                  and the owning side of a forward
    forwarding.py a retry on its way to its call's owner (made before the claim, which
                  can carry it)
    takeover.py   continue a gone replica's call on its adopted session, or cancel it
    outcomes.py   a resumed round's outcome kept for a retry sent again
    replicas.py   what the core does alone and in a fleet: where a retry whose call is
                  not here goes, whether outcomes are kept, waits counted in heartbeats
    pace.py       how long a round waits for a question's siblings, learnt per tool

The sans-IO cores are `gateway.protocol.call` (a call's phases and what each ending
requires) and `gateway.protocol.record` (the stored record's transition table). The
package depends on ports, not on transports: `gateway.upstream.port` for legacy
sessions, `gateway.fleet.port.Bus` for other replicas (in the messages of
`gateway.fleet.messages`; alone, the fleet of one), `gateway.store.base.SuspendedCallStore`, and
`gateway.clock.Clock`.
"""
