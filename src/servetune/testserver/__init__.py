"""servetune.testserver"""
