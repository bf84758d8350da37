export PYTHONPATH=$PWD REPLAYSSM_COMMIT=$COMMIT
timeout 150 python -m pytest -x -q tests/ops/test_gdn_spec.py -k cuda 2>&1 | tail -2 || exit 1
timeout 300 python scratch_v.py 2>&1 | grep -v Warn
