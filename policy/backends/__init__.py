"""Model backends: where a model's text comes from (in-process transformers, or an
OpenAI-compatible server such as vLLM, SGLang or `transformers serve`). See ``policy.backends.base``."""
