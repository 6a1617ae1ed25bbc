"""milktea: communication-efficient distributed training, taught through a milk-tea shop."""
__version__ = "0.1.0"
