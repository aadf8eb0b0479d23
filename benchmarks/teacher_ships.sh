#!/usr/bin/env bash
# Issue #26 item 4: the README's "When a new teacher ships" with the small recipe's GRPO student as the teacher.
# Serve it, register it --auto-distill, and let the Dagster daemon's sensors do the rest (collection through the
# openai SDK, consolidation, curation, the small recipe, both evaluations); then record the row (recipes.py: dev and
# held-out play of both versions, wall seconds from the instance's event log) and the teacher's own held-out play.
# Resumable: rerun after a kill.
#
#     RUNS=/path/to/runs [SERVER=evoharness|transformers] [TEACHER=NAME] [VERSION=MODEL_VERSION] \
#         bash benchmarks/teacher_ships.sh >> teacher_ships.log 2>&1
#
# SERVER evoharness (the default): the engine server, the teacher registered with --structured-outputs vllm, so its
# turns decode held to the game's commands as the same student's do locally; transformers: `transformers serve`,
# which decodes freely (row 3 of recipes.json, teacher `served-student`). TEACHER defaults to `served-grammar` for
# the first and `served-student` for the second. VERSION: the student served (default: the expert's newest GRPO
# version; the rows so far served expert-grpo-775dfaa9ee19).
#
# RUNS holds recipes/ (warehouse.duckdb, dagster_home, models: the small recipe's run through Dagster, as
# `benchmarks/recipes.py --via dagster --recipe small` leaves it); where it holds no such student yet, that run comes
# first (on an AMX Xeon: about 1 h 20 min with its evaluations, then 1 h 37 min here: docs/results.md, the
# walk-through). Logs go to $RUNS/teacher_ships_<teacher>_{serve,daemon}.log.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${RUNS:?set RUNS to the folder holding recipes/ (the small recipe: warehouse and Dagster instance)}"
export ALFWORLD_DATA="${ALFWORLD_DATA:-$(cd .. && pwd)/shared/alfworld}" EVOHARNESS_DB=$RUNS/recipes/warehouse.duckdb \
       DAGSTER_HOME=$RUNS/recipes/dagster_home OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 ACCELERATE_USE_CPU=true \
       DAGSTER_DISABLE_TELEMETRY=1 EVOHARNESS_TEACHERS=$RUNS/recipes/teachers.yaml \
       EVOHARNESS_TRAIN_LAUNCH="accelerate launch --config_file configs/accelerate/multi_cpu.yaml" \
       PYTHONPATH=$(pwd)
[ -d "$ALFWORLD_DATA/json_2.1.1" ] || { echo "no json_2.1.1/ under ALFWORLD_DATA=$ALFWORLD_DATA: set ALFWORLD_DATA"; exit 2; }
SERVER=${SERVER:-evoharness} PORT=8011
case $SERVER in
  evoharness) TEACHER=${TEACHER:-served-grammar} STRUCTURED="--structured-outputs vllm" ;;
  transformers) TEACHER=${TEACHER:-served-student} STRUCTURED="" ;;
  *) echo "SERVER must be evoharness or transformers, not $SERVER"; exit 2 ;;
esac
export TEACHER
mkdir -p $RUNS/recipes
[ -f "$EVOHARNESS_TEACHERS" ] || cp teachers.yaml "$EVOHARNESS_TEACHERS"
newest_expert_student() {
  python -c "
from warehouse import Warehouse, default_db_path
with Warehouse(default_db_path(), read_only=True) as wh:
    print(wh.query('newest_model_version', teacher='expert', stage='grpo')[1][0][0])" 2>/dev/null
}
if [ -n "${VERSION:-}" ]; then :  # the teacher named by the caller
elif ! VERSION=$(newest_expert_student); then
  echo "=== $(date -u) no small-recipe student of the expert yet: its recipe run through Dagster first"
  python benchmarks/recipes.py --via dagster --recipe small --teacher expert
  VERSION=$(newest_expert_student)
fi
echo "=== $(date -u) serving $VERSION"
setsid evoharness serve --model-version "$VERSION" --port $PORT --server $SERVER --threads 2 \
    > $RUNS/teacher_ships_${TEACHER}_serve.log 2>&1 &
SERVER=$!
# A process group stopped by signal $2, then SIGKILL after a minute: `dagster dev` leaves on SIGINT once its children
# have (and sometimes never); `evoharness serve` on SIGTERM, stopping its server child (a job started with & in a
# script ignores SIGINT, and a SIGKILL'd serve would leave the child listening).
stop_group() {
  kill -"$2" -- -"$1" 2>/dev/null || return 0
  for _ in $(seq 60); do kill -0 -- -"$1" 2>/dev/null || return 0; sleep 1; done
  kill -KILL -- -"$1" 2>/dev/null || true
}
trap 'stop_group $SERVER TERM; [ -n "${DAEMON:-}" ] && stop_group $DAEMON INT; true' EXIT
until grep -q "register it" $RUNS/teacher_ships_${TEACHER}_serve.log; do sleep 5; kill -0 $SERVER; done
read -r MODEL BANK < <(python -c "
from warehouse import Warehouse, default_db_path
with Warehouse(default_db_path(), read_only=True) as wh:
    print(*wh.one('model_version_player', model_version='$VERSION'))")  # its folder and the bank it trained with
if ! grep -q "name: $TEACHER" "$EVOHARNESS_TEACHERS"; then
  evoharness teacher add $TEACHER --provider openai_compatible --model "$MODEL" --base-url http://127.0.0.1:$PORT/v1 \
      --price-in 0 --price-out 0 --prompt-template alfworld/bpe_student --bank-version "$BANK" --max-tokens 64 \
      --max-concurrency 16 --auto-distill --max-spend-usd 1 $STRUCTURED
fi
# A distill_teacher run killed with an earlier session stays STARTED until the daemon's orphaned_run_sensor marks it
# failed and starts it again (every stage resumes what is stored): the daemon alone carries the run to its end.
# `dagster dev`, as the README runs it: its daemon and webserver share one code server (a bare `dagster-daemon run -m`
# starts a new one every 60 s, about 7 % of a core; notebook 2026-12-05).
# A distill_teacher run of the teacher that failed for a cause now fixed (the sensor does not request a run key
# twice) is launched again, as the UI's re-execution would: every stage resumes what is stored.
if FAILED=$(python -c "
import json, os, sys
import dagster as dg
with dg.DagsterInstance.get() as instance:
    runs = instance.get_runs(dg.RunsFilter(job_name='distill_teacher', tags={'dagster/partition': os.environ['TEACHER']}), limit=1)
    if not runs or runs[0].status != dg.DagsterRunStatus.FAILURE or runs[0].tags.get('dagster/failure_reason') == 'UNEXPECTED_TERMINATION':
        sys.exit(1)  # none, still going, or resumed by the orphan sensor
    print(json.dumps(runs[0].run_config))" 2>/dev/null); then
  echo "=== $(date -u) the failed distillation again"
  dagster job launch -m pipelines.definitions -j distill_teacher --config-json "$FAILED" \
      --tags "{\"dagster/partition\": \"$TEACHER\", \"teacher\": \"$TEACHER\"}"
fi
echo "=== $(date -u) daemon"
setsid dagster dev -m pipelines.definitions -p 3011 > $RUNS/teacher_ships_${TEACHER}_daemon.log 2>&1 &
DAEMON=$!
python - <<'PY'
# wait until the teacher's distillation succeeded and both new versions have an evaluation
import os, sys, time
import dagster as dg
TEACHER = os.environ["TEACHER"]
def newest(instance):
    runs = instance.get_runs(dg.RunsFilter(job_name="distill_teacher", tags={"dagster/partition": TEACHER}), limit=1)
    return runs[0] if runs else None
with dg.DagsterInstance.get() as instance:
    while True:
        run = newest(instance)
        if run and run.status == dg.DagsterRunStatus.FAILURE:
            time.sleep(300)  # a run the orphan sensor failed is followed by its resumption within a tick or two
            if newest(instance).run_id == run.run_id:
                sys.exit(f"distill_teacher failed: run {run.run_id}")
        if run and run.status == dg.DagsterRunStatus.SUCCESS:
            from warehouse import Warehouse, default_db_path
            with Warehouse(default_db_path(), read_only=True, lock_wait_s=300) as wh:
                versions = [r[0] for r in wh.con.execute(
                    "SELECT model_version FROM model_versions WHERE teacher = ?", [TEACHER]).fetchall()]
            evaluated = instance.get_materialized_partitions(dg.AssetKey("student_evaluation"))
            if len(versions) == 2 and all(v in evaluated for v in versions):
                print("distilled and evaluated:", versions, flush=True)
                break
        time.sleep(60)
PY
stop_group $DAEMON INT; DAEMON=
echo "=== $(date -u) the row"
python benchmarks/recipes.py --via dagster --recipe small --teacher $TEACHER
echo "=== $(date -u) the teacher on the held-out splits, through the server"
for split in valid_seen valid_unseen; do evoharness collect --teacher $TEACHER --split $split --max-steps 70; done
echo "=== $(date -u) done"
