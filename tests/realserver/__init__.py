"""A real llama.cpp server (llama-cpp-python) for the test suite: GGUF conversion and a served
process. Not part of the shipped package."""
