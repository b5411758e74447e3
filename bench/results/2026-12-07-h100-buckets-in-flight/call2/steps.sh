step fused 100 carry/gpu-suite --only hier-fused-2x2 --budget 200 --out $R/suite-fused
step fused2 140 carry/gpu-suite --only hier-fused-2x2 --budget 200 --out $R/suite-fused2
step hier 300 carry/gpu-suite --only hier-2x2 --budget 200 --out $R/suite-hier
