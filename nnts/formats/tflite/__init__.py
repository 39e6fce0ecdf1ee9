"""The .tflite format: reading, writing, importing to NNAPI and exporting from it."""
