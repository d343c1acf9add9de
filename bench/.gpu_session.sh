set -uo pipefail
source <(sed -n '/^extra=/,/^export MEMPLAN_SOURCE_DIR/p' bench/cuda_bench.sh)
mkdir -p $OUT/g
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/g/device.txt
timeout 300 .carry/bin/test_runtime_allocator -tc='*GPU*,*CUDA*,*cuda*,bf16/f16*,one SGD step of a bf16/f16*,CrossEntropyLoss and its gradient*,SumLoss and SumLossGrad*,a cross-entropy training step*,*three in-place steps*' > $OUT/g/tests.txt 2>&1; echo "tests rc $?" >> $OUT/g/tests.txt
B=.carry/bin/bench_cuda
for p in fp32 bf16; do
  timeout 120 $B train samples/transformers/gpt2_small.train.onnx 10 batch=8 seq=256 optimizer=adam loss=ce strategies=none precision=$p > $OUT/g/gpt2_adam_ce_$p.json 2> $OUT/g/gpt2_adam_ce_$p.err
  timeout 120 $B train samples/models/resnet18.train.onnx 10 batch=32 optimizer=momentum loss=ce strategies=none precision=$p > $OUT/g/resnet18_mom_ce_$p.json 2> $OUT/g/resnet18_mom_ce_$p.err
done
timeout 120 $B train samples/transformers/llama_gqa.train.onnx 10 batch=8 seq=256 optimizer=adam loss=ce strategies=none precision=bf16 > $OUT/g/llama_adam_ce_bf16.json 2> $OUT/g/llama_adam_ce_bf16.err
python3 bench/export_transformers.py --only roberta_small --out /tmp/ox > $OUT/g/export.txt 2>&1; ls /tmp/ox >> $OUT/g/export.txt; timeout 120 $B train /tmp/ox/roberta_small.train.onnx 5 batch=8 seq=256 optimizer=none strategies=none > $OUT/g/roberta.json 2> $OUT/g/roberta.err
python3 bench/torch_recipes.py --losses mse --json $OUT/g/torch_recipes_mse.json > $OUT/g/torch_recipes_mse.txt 2>&1
cd $OUT && tar czf g.tgz g
