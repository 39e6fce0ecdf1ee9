"""NNAPI drivers behind nnapi_ref.hal.Device: the reference CPU driver, its variants, and broken ones."""
