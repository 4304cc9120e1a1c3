"""The data contract data_prep and the trainer agree on, JAX-free: manifest.py (manifest.json),
data_facts.py (config + manifests -> the facts every stage uses), shard_files.py (the shards a
manifest lists and their one check), features.py (the record schema), record_io.py (the files).
"""
