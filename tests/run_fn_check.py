"""Runs the Trainer's run_fn outside TFX (as the GenericExecutor would) from a JSON spec.

Used by test_trainer_resume.py, which kills this process mid-training and runs it again.
"""

import json
import logging
import sys

from tfx.components.trainer.fn_args_utils import FnArgs

from lmfactory.components.trainer.run_fn import run_fn

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, force=True)  # the Trainer's progress lines, as TFX logs them
    spec = json.loads(sys.argv[1])
    run_fn(FnArgs(**spec))
    print("RUN_FN_DONE", flush=True)
