"""Cycle programs: a corpus compiled into fixed buffers and ordered commands per rank."""
