"""Client quotas in virtual clusters (KIP-1134): the model, the meters and the quota RPCs, sans-I/O.
The quota stage (proxy/core/stages/quotas.py) enforces them; docs/quotas.md describes them."""
