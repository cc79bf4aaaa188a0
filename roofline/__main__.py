import os
import sys

try:
    from roofline.cli import entry
except KeyboardInterrupt:  # Ctrl-C before the command line's own handler is installed (roofline.cli.entry)
    print("\nroofline: interrupted", file=sys.stderr)
    sys.stderr.flush()
    os._exit(130)

entry()
