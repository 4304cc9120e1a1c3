"""The trainer's input, record files -> Grain -> host batches (pipeline.py): sources.py and
bad_records.py read and check records, masking.py masks them, packing.py and packed_records.py
pack them, growing_batches.py warms the batch size up.
"""
