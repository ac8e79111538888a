"""The speculative decoding engine: the FIM prompt, proposers, the acceptance rule and the round loop.

It knows backends only through their protocol (:mod:`codecue.backends.base`) and never sees tree-sitter.
"""
