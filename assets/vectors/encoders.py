"""Dense and learned-sparse node vectors, each by the corpus's model of its role (``models.yaml``), a
tuned dense model where the lake tunes its own."""

import json
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
from dagster import AssetExecutionContext, Config, asset

from graphlake.common.progress import StepProgress
from graphlake.common.settings import encoder_precision, model_cache
from graphlake.common.shards import map_shards
from graphlake.kernels.text import encoders, query_encoders
from graphlake.retrieval.index.encoders import encode_dense
from graphlake.retrieval.index.tables import retrieval_texts
from graphlake.retrieval.pending.encodings import kept_rows
from graphlake.warehouse.corpora import TUNED_ARTIFACT, TUNING_DECISION, corpus_model, stored_revision
from graphlake.warehouse.digest import content_hash
from graphlake.warehouse.encoder_specs import ROLE_MARK, ModelSpec, declared_models, model_identity, revision
from graphlake.warehouse.io_manager import LakeResource
from graphlake.warehouse.partitions import corpus_partitions
from graphlake.warehouse.storage import StorageError
from graphlake.warehouse.write_log import WriteLog

VECTOR_COLUMNS = ["content_hash", "dense", "indices", "values"]


EMBEDDING_CACHE = "embedding_cache"  # folder in the lake root: a hosted model's answered batches (common/embeddings.py)


class TuningConfig(Config):
    """How a dense model the lake tunes (``tune:`` in models.yaml) learns; retrieval/training/dense_tuning.py."""

    epochs: int = 1
    learning_rate: float = 2e-5
    batch_size: int = 16
    validation_share: float = 0.2
    pool: int = 30
    seed: int = 0


class EncoderConfig(Config):
    batch_size: int = 0  # texts per batch; 0 = the encoder's fastest measured on its device (kernels/text/encoders.py)
    threads: int = 0  # 0 = torch's default (all cores)
    tuning: TuningConfig = TuningConfig()


def _encode_with_cache(
    context: AssetExecutionContext, lake: LakeResource, role: str, made_by: dict[str, str], nodes: pa.Table, documents: pa.Table, encode: Callable[[list[str]], list[dict]]
) -> tuple[pa.Table, dict]:
    """Reuse the previous vectors of unchanged inputs made by the same model (name and revision), and
    the vectors kept with the corpus's pending writes (``retrieval/pending/encodings.py``); encode only
    the other new or changed nodes, in shards (``common/shards.py``: tasks of their own on a Dask
    cluster). Reused rows are taken from the previous table as Arrow columns: no vector becomes Python
    objects."""
    model, revision = made_by["name"], made_by["revision"]
    texts = retrieval_texts(nodes, documents)
    hashes = [content_hash(t) for t in texts]
    partition = {"corpus": context.partition_key, "model": model}
    previous = lake.storage.read("vectors", partition) if lake.storage.has("vectors", partition) else None
    if previous is not None and previous.num_rows and (stored := stored_revision(lake.storage, "vectors", partition, role)) != revision:
        context.log.info(f"{model}: its weights changed ({stored} -> {revision}): every node is encoded again")
        previous = None
    if previous is None or not previous.num_rows:
        previous = _vectors_of_same_weights(context, lake, role, revision, model)
    previous = previous.select(VECTOR_COLUMNS) if previous is not None else None
    built_rows = previous.num_rows if previous is not None else 0
    written = kept_rows(WriteLog(lake.storage.home, context.partition_key, lambda: 0).folder, role, made_by)  # a fold: what the writes' process encoded
    if written.num_rows:
        previous = pa.concat_tables([previous.cast(written.schema), written]) if previous is not None else written
    row_of: dict[str, int] = {}
    for row, h in enumerate(previous.column("content_hash").to_pylist() if previous is not None else []):
        row_of.setdefault(h, row)  # the build's own vector before a write's
    # by length, so that a shard's texts pad alike and the batches do not depend on where shards run
    missing = sorted((i for i, h in enumerate(hashes) if h not in row_of), key=lambda i: len(texts[i]))
    started = time.perf_counter()
    progress = StepProgress(f"{model} encoding", len(missing), context.log.info, unit="nodes")
    encoded, sharded = map_shards(encode, [texts[i] for i in missing], progress.advance, name=f"{model}-{context.partition_key}")
    seconds = time.perf_counter() - started
    fresh = pa.table(
        {
            "content_hash": pa.array([hashes[i] for i in missing], pa.string()),
            "dense": pa.array([r["dense"] for r in encoded], pa.list_(pa.float32())),
            "indices": pa.array([r["indices"] for r in encoded], pa.list_(pa.int32())),
            "values": pa.array([r["values"] for r in encoded], pa.list_(pa.float32())),
        }
    )
    reused = [i for i, h in enumerate(hashes) if h in row_of]
    parts = [fresh, *([previous.take([row_of[hashes[i]] for i in reused]).cast(fresh.schema)] if reused else [])]
    position = np.empty(len(hashes), np.int64)  # each node's row in the concatenation
    position[missing], position[reused] = np.arange(len(missing)), len(missing) + np.arange(len(reused))
    vectors = pa.concat_tables(parts).take(position)
    rows = len(hashes)
    table = pa.table({"model": [model] * rows, "node_id": nodes.column("node_id"), **{name: vectors.column(name) for name in VECTOR_COLUMNS}, "revision": [revision] * rows})
    metadata = {
        "model": model,
        "revision": revision,
        "encoded": len(missing),
        "reused": len(reused),
        "reused_from_writes": sum(row_of[hashes[i]] >= built_rows for i in reused),
        "encode_seconds": round(seconds, 2),
        "passages_per_second": round(len(missing) / seconds, 1) if missing and seconds > 0 else 0.0,
        **sharded.as_metadata(),
    }
    context.log.info(f"{model}: encoded {len(missing)} nodes, reused {len(reused)}")
    return table, metadata


def _vectors_of_same_weights(context: AssetExecutionContext, lake: LakeResource, role: str, revision: str, model: str) -> pa.Table | None:
    """The corpus's vectors that another name for the same weights made (a tuned model that kept its base,
    a model declared twice): reused, as its own would be."""
    for other in lake.storage.partitions("vectors", {"corpus": context.partition_key}):
        if other["model"] != model and lake.storage.rows("vectors", other) and stored_revision(lake.storage, "vectors", other, role) == revision:
            context.log.info(f"{model}: the weights that made {other['model']}'s vectors ({revision}): reusing them")
            return lake.storage.read("vectors", other)
    return None


def encoding_model(lake: LakeResource, corpus: str, role: str) -> tuple[ModelSpec, dict[str, str]]:
    """The model ``corpus`` uses for ``role`` and its identity; refused, naming it, where it cannot encode here."""
    spec = corpus_model(lake.storage, corpus, role)
    problem = spec.problem()
    if problem:
        raise StorageError(f"corpus {corpus!r}: {role} model {spec.name!r} ({spec.source}) cannot encode: {problem}")
    return spec, model_identity(spec, model_cache())


def _vector_asset(name: str, role: str, queries: str, encode_rows: Callable[..., list[dict]], description: str):
    """An asset writing the vectors of the corpus's ``role`` model (its partition of ``vectors``),
    encoding only new or changed nodes; it also exports the model's query encoder (``queries``), so
    that the first query pays no export."""
    metadata = {"table": "vectors", "partition": {"model": f"{ROLE_MARK}{role}"}}

    @asset(name=name, partitions_def=corpus_partitions, metadata=metadata, description=description)
    def vectors(context: AssetExecutionContext, config: EncoderConfig, lake: LakeResource, nodes: pa.Table, documents: pa.Table) -> pa.Table:
        if config.threads > 0:
            import torch

            torch.set_num_threads(config.threads)
        if role == "dense" and lake.registry.model(context.partition_key, role).tune:
            context.add_output_metadata(_tuned(context, lake, config.tuning))
        spec, made_by = encoding_model(lake, context.partition_key, role)
        encode = partial(encode_rows, batch_size=config.batch_size, spec=spec, cache=lake.storage.home / EMBEDDING_CACHE)
        table, metadata = _encode_with_cache(context, lake, role, made_by, nodes, documents, encode)
        if spec.endpoint is None:  # a hosted model encodes the queries too
            query_encoders.prepare(queries, spec.path(), model_cache())
        context.add_output_metadata(metadata)
        return table

    return vectors


def _tuned(context: AssetExecutionContext, lake: LakeResource, config: TuningConfig) -> dict:
    """Tune the corpus's dense model on its training queries unless the kept decision was made from the
    same base weights, settings and training data; its metadata (which encoder was kept, and why)."""
    from graphlake.retrieval.training.dense_tuning import TuningSettings, training_set, tune

    corpus = context.partition_key
    declared = lake.registry.model(corpus, "dense")
    base = declared_models(lake.storage.home).models[declared.tune]
    settings = TuningSettings(**config.model_dump())
    data = training_set(lake.storage, corpus)
    fingerprint = data.fingerprint(revision(base, model_cache()), settings)
    partition = {"corpus": corpus}
    if lake.storage.artifact_written_at(TUNED_ARTIFACT, partition) is not None:
        decision = json.loads((lake.storage.artifact(TUNED_ARTIFACT, partition) / TUNING_DECISION).read_text(encoding="utf-8"))
        if decision.get("fingerprint") == fingerprint:
            return {"tuning": decision["kept"], "note": f"{declared.name}: tuned before on the same data; the {decision['kept']} encoder stays"}

    def fill(folder: Path) -> None:
        decision.update(tune(data, base.path(), settings, folder / "model", context.log.info), base=base.name, fingerprint=fingerprint)
        (folder / TUNING_DECISION).write_text(json.dumps(decision, indent=1), encoding="utf-8")

    decision: dict = {}
    lake.storage.write_artifact(TUNED_ARTIFACT, partition, fill)
    held = decision.get("held_out", {})
    return {"tuning": decision["kept"], "note": decision["said"], **({"held_out_ndcg_tuned": held["tuned"], "held_out_ndcg_untuned": held["untuned"]} if held else {})}


def _dense_rows(texts: list[str], batch_size: int, spec: ModelSpec, cache: Path) -> list[dict]:
    vectors = encode_dense(spec, texts, batch_size=batch_size, cache=cache)
    return [{"dense": v, "indices": None, "values": None} for v in vectors]


def _splade_rows(texts: list[str], batch_size: int, spec: ModelSpec, cache: Path) -> list[dict]:
    matrix = encoders.encode_splade(texts, batch_size=batch_size, dtype=encoder_precision(), folder=spec.path())
    return [{"dense": None, "indices": matrix.indices[a:b], "values": matrix.data[a:b]} for a, b in zip(matrix.indptr[:-1], matrix.indptr[1:], strict=True)]


dense_vectors = _vector_asset("dense_vectors", "dense", "dense", _dense_rows, "The corpus's dense model's vectors (unit length, 256 tokens; models.yaml), cached by input hash.")


splade_vectors = _vector_asset("splade_vectors", "sparse", "splade", _splade_rows, "The corpus's learned-sparse model's term weights (vocabulary ids and weights), cached by input hash.")
