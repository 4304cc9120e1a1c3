"""The trainer's input: record files -> Grain -> host batches.

sources.py          record files as Grain sources (TFRecordSource, CheckedSource)
bad_records.py      a damaged record: an error naming it, or skipped, counted and bounded
pipeline.py         record sources -> Grain -> host batches
masking.py          dynamic masking
packing.py          several sequences a row; packed_records.py: packed rows read back
growing_batches.py  batch-size warmup
"""
