"""h3strict: the MiniMax-H3 transformer in strict mode (bitwise identical whether a request runs alone or inside a
training batch of any size, on any thread count).

The PyTorch binding is h3strict.torch (StrictTransformer, scheduler, trajectory); `python -m h3strict.replay` compares
every node with diffusers' MiniMaxH3Transformer3DModel (it needs diffusers); this module holds what needs no torch:
the library's version and its exceptions.
"""

from ._lib import H3StrictError, H3StrictInputError, version

__version__ = version()
__all__ = ["H3StrictError", "H3StrictInputError", "version", "__version__"]
