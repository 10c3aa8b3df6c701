"""servetune.sim"""
