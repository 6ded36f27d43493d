"""``python -m kube_ccm`` is the ``kube-ccm`` command."""

import sys

from kube_ccm.app.cli import main

sys.exit(main())
