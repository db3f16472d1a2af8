"""Every asset is partitioned by corpus; corpora are added at run time, so partitions are dynamic."""

from dagster import DynamicPartitionsDefinition

corpus_partitions = DynamicPartitionsDefinition(name="corpus")
