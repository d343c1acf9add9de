set -uo pipefail
source <(sed -n '/^extra=/,/^export MEMPLAN_SOURCE_DIR/p' bench/cuda_bench.sh)
mkdir -p $OUT/g
T=.carry/bin/test_runtime_allocator
timeout 300 $T -tc='*GPU*,*CUDA*,*cuda*,bf16/f16*,*bf16*,*f16*,one SGD step of a bf16/f16*,CrossEntropyLoss and its gradient*,SumLoss and SumLossGrad*,a cross-entropy training step*,*three in-place steps*,*loss scal*,*GradScaler*' > $OUT/g/tests.txt 2>&1; echo "tests rc $?" >> $OUT/g/tests.txt
timeout 200 compute-sanitizer --tool memcheck $T -tc='bf16/f16 BatchNorm*,*loss scal*' > $OUT/g/memcheck.txt 2>&1; echo "memcheck rc $?" >> $OUT/g/memcheck.txt
B=.carry/bin/bench_cuda
run() { n=$1; shift; timeout 150 $B train "$@" > $OUT/g/$n.json 2> $OUT/g/$n.err; }
for p in fp32 bf16; do
  run resnet18_mom_ce_$p samples/models/resnet18.train.onnx 10 batch=32 optimizer=momentum loss=ce strategies=none precision=$p
  run mobilenet_mom_ce_$p samples/models/mobilenet_v2.train.onnx 10 batch=32 optimizer=momentum loss=ce strategies=none precision=$p
  run llama_adam_ce_$p samples/transformers/llama_gqa.train.onnx 10 batch=8 seq=256 optimizer=adam loss=ce strategies=none precision=$p
  run bert_adam_ce_$p samples/transformers/bert_small.train.onnx 10 batch=8 seq=256 optimizer=adam loss=ce strategies=none precision=$p
  run deit_mom_ce_$p samples/transformers/deit_tiny.train.onnx 10 batch=32 optimizer=momentum loss=ce strategies=none precision=$p
  run gpt2_adam_ce_$p samples/transformers/gpt2_small.train.onnx 10 batch=8 seq=256 optimizer=adam loss=ce strategies=none precision=$p
done
run resnet18_prof samples/models/resnet18.train.onnx 5 batch=32 optimizer=momentum loss=ce strategies=none profile=1
run resnet18_side samples/models/resnet18.train.onnx 10 batch=32 optimizer=momentum loss=ce strategies=none side_workspace=1
python3 bench/export_transformers.py --only roberta_small --out /tmp/ox > $OUT/g/export.txt 2>&1
run roberta /tmp/ox/roberta_small.train.onnx 5 batch=8 seq=256 optimizer=none strategies=none
python3 bench/torch_recipes.py --only resnet18,mobilenet_v2,llama_gqa,bert_small,deit_tiny,gpt2_small --optimizers momentum,adam --precisions fp32,bf16 --losses ce --json $OUT/g/torch_ce.json > $OUT/g/torch_ce.txt 2>&1
cd $OUT && tar czf g.tgz g
