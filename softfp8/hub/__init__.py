"""Loading and saving whole models: transformers checkpoints in softfp8's formats."""
