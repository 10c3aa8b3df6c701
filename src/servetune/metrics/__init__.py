"""servetune.metrics"""
