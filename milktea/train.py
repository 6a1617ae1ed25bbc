"""`python -m milktea.train`: DDP training of the digits classifier with one communication
scheme, under torchrun or on its own local workers. See milktea.distributed.train."""
from milktea.distributed.train import TrainConfig, main, train

__all__ = ["TrainConfig", "main", "train"]

if __name__ == "__main__":
    main()
