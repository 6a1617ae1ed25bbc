"""python -m milktea.distributed -n 2 package.module:function  (see milktea.distributed.launch)."""
from milktea.distributed.launch import main

main()
