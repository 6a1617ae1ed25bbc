"""`python -m milktea.train`: DDP training of the digits classifier with one communication
scheme, under torchrun or on its own local workers. See milktea.distributed.train."""
import os

from milktea.distributed.train import TrainConfig, main, train

__all__ = ["TrainConfig", "main", "train"]

if __name__ == "__main__":
    main()
    if "RANK" in os.environ:   # under torchrun this process joined (and left) a process group
        from milktea.distributed.worker import end_process
        end_process(0)         # a normal exit can abort in gloo's threads: see end_process
