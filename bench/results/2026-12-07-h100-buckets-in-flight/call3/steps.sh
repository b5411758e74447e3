step fused3 60 carry/gpu-suite --only hier-fused-2x2 --budget 200 --out $R/suite-fused3
step fused4 100 carry/gpu-suite --only hier-fused-2x2 --budget 200 --out $R/suite-fused4
step fused5 140 carry/gpu-suite --only hier-fused-2x2 --budget 200 --out $R/suite-fused5
