"""The public tests, one module per exercise notebook. Hidden tests live with the instructor."""
from . import ch01, ch02, ch03, ch04, ch05, ch06

CHAPTERS = {
    "01_bottleneck": ch01.TASKS,
    "02_compress": ch02.TASKS,
    "03_topk": ch03.TASKS,
    "04_error_feedback": ch04.TASKS,
    "05_quantization": ch05.TASKS,
    "06_engineering": ch06.TASKS,
}
