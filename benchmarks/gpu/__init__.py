"""What runs on a lent GPU: the CUDA path checked and measured, the training-step levers profiled."""
