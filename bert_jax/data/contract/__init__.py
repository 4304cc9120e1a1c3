"""The data contract: what data_prep and the trainer agree on. JAX-free (data_prep imports it).

manifest.py     manifest.json: its fields, its one reader (load), data_prep's file names
data_facts.py   config + the data's manifest.json -> the facts every stage uses (resolve)
shard_files.py  the shards a manifest lists (find_shards) and the one shard check
                (shard_problem: data_prep's reruns and --verify, and the trainer)
features.py     the record schema
record_io.py    TFRecord/ArrayRecord read and written (the one TFRecord parser)
"""
