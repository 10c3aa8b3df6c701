"""servetune.diagnose"""
