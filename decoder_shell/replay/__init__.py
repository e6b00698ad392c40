"""Replay: run a corpus's cycle on a driver, epoch after epoch, bit-exact or failed."""
