"""data_prep: raw text -> masked MLM/NSP training records (TFRecord or ArrayRecord)."""
