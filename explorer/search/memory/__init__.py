"""Conversation memory: whose a note is and whom a query names (signals.py), the turn model that
re-orders the first fused turns (rescore.py, its weights in models/), turns' token vectors, and the
days a query names."""
