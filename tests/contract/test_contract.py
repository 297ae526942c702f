"""The contract suite shipped in `kitchen.testing.contract`, over kitchen's own backends (the
`backend` fixture of this folder's conftest is parametrized over them)."""

from kitchen.testing.contract.test_checkpoints import *  # noqa: F403
from kitchen.testing.contract.test_sampling import *  # noqa: F403
from kitchen.testing.contract.test_training import *  # noqa: F403
