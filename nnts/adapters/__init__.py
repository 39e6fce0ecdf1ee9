"""Other runtimes as NNAPI drivers: ONNX Runtime and TensorFlow Lite behind nnapi_ref.hal.Device."""
