"""Test and benchmark helpers that ship with the library: a loopback LLM server, scripted players."""
