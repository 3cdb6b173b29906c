"""python -m tools.pages [--check] [PAGE...]: regenerate the numbers of README.md and docs/ from the trial records."""
from tools.pages import main

raise SystemExit(main())
