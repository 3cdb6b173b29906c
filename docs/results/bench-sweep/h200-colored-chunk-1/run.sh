# The command of this lease (device tool, carry .whl/site.tar.xz and .whl/mnist.tar.xz, timeout 600 s), from the
# repository root at 5248c3f; tools/gpu-sweep-chunk.sh names its files (sweep.txt here is its colored-mnist-paper.txt).
OUT=$OUT PACK=.whl BUDGET=570 NAME=colored-mnist-paper bash tools/gpu-sweep-chunk.sh --grid domainbed-colored \
  --profile paper --seeds 1 --workers 16 --device cuda
# --workers 16 is the local backend's count: the Tune backend ignored it (an error since), and ran what the plan
# holds, 8 trials at once (each asks 1/8 of the GPU).
