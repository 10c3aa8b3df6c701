"""servetune.results"""
