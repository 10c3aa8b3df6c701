"""servetune.client"""
