"""The documentation, installed as ``nnts.docs`` so that ``nnts docs`` finds it in a wheel too."""
