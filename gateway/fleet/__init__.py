"""Replicas of one fleet: who is alive, and how messages reach a replica (Redis)."""
