"""vLLM's OpenAI-compatible server: the peer the vLLM field report runs on a V100."""
