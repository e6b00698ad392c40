"""decoder-shell: capture one tensor-parallel speculative decode cycle, replay it bit-exact."""

__version__ = "0.1.0"
