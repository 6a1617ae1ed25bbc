"""python -m milktea.dist -n 2 package.module:function  (see milktea.dist.launch)."""
from milktea.dist.launch import main

main()
