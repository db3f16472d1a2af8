"""Incremental reindexing: re-run a corpus when its registry entry or its raw files change.

The sensor fingerprints each declared corpus (its spec plus the size and mtime of every raw
file) and requests an ``index_corpus`` run keyed by that fingerprint, so an unchanged corpus is
never re-run and a retried evaluation never submits the same run twice.
"""

import hashlib
import json
from pathlib import Path

from dagster import DefaultSensorStatus, RunRequest, SensorEvaluationContext, SensorResult, sensor

from graphlake.warehouse.corpora import CorpusSpec
from graphlake.warehouse.io_manager import LakeResource
from graphlake.warehouse.partitions import corpus_partitions


def fingerprint(spec: CorpusSpec) -> str:
    digest = hashlib.blake2b(spec.model_dump_json().encode(), digest_size=16)
    for root in filter(None, (spec.path, spec.queries)):
        root_path = Path(root)
        files = sorted(root_path.rglob("*")) if root_path.is_dir() else [root_path]
        for path in files:
            if path.is_file():
                stat = path.stat()
                digest.update(f"{path}\x1f{stat.st_size}\x1f{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


@sensor(
    job_name="index_corpus",
    minimum_interval_seconds=300,
    default_status=DefaultSensorStatus.STOPPED,
    description="Adds declared corpora as partitions and reindexes those whose spec or raw files changed.",
)
def corpus_change_sensor(context: SensorEvaluationContext, lake: LakeResource) -> SensorResult:
    seen: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
    corpora = lake.registry.all()
    new = sorted(set(corpora) - set(context.instance.get_dynamic_partitions(corpus_partitions.name)))
    requests = []
    for name, spec in sorted(corpora.items()):
        current = fingerprint(spec)
        if seen.get(name) != current:
            requests.append(RunRequest(run_key=f"{name}:{current}", partition_key=name))
            seen[name] = current
    return SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[corpus_partitions.build_add_request(new)] if new else None,
        cursor=json.dumps(seen, sort_keys=True),
    )
