"""gpuctl coordinator: reconciles GPUDriver objects into KMM Modules and drives node rollouts."""
