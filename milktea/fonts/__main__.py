"""`python -m milktea.fonts lab-custom FOLDER`: see milktea.fonts.main."""
import sys

from milktea.fonts import main

sys.exit(main())
