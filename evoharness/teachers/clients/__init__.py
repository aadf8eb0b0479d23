"""Chat clients behind one interface: Anthropic, OpenAI, OpenAI-compatible servers, local HF models."""
