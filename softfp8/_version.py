"""softfp8's version (a leaf: the package, the probe and saved configs read it)."""
__version__ = "0.1.0"
